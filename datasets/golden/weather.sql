-- Wet days (5 mm of rain or more) per country; a missing reading is not a wet day.
SELECT s.country, COUNT(*) AS wet_days, MAX(d.precipitation_mm) AS wettest_mm
FROM daily AS d
JOIN stations AS s ON s.station_id = d.station_id
WHERE d.precipitation_mm >= 5
GROUP BY s.country
ORDER BY wet_days DESC, s.country
