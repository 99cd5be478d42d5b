# Revenue by product category, for orders that were shipped or delivered.
sold = orders[orders["status"].isin(["shipped", "delivered"])]
lines = sold.merge(products, on="product_id")
lines["revenue"] = lines["quantity"] * lines["unit_price"]
by_category = lines.groupby("category", as_index=False).agg(
    orders=("order_id", "count"),
    units=("quantity", "sum"),
    revenue=("revenue", "sum"),
)
result_df = by_category.round({"revenue": 2}).sort_values("revenue", ascending=False)
