-- The five best customers by spend, on orders that were shipped or delivered.
SELECT c.name, c.country, COUNT(*) AS orders, ROUND(SUM(o.quantity * p.unit_price), 2) AS spend
FROM orders AS o
JOIN customers AS c ON c.customer_id = o.customer_id
JOIN products AS p ON p.product_id = o.product_id
WHERE o.status IN ('shipped', 'delivered')
GROUP BY c.customer_id
ORDER BY spend DESC
LIMIT 5
