# Mean daily maximum and total precipitation per station, warmest first.
summary = daily.groupby("station_id").agg(
    days=("date", "count"),
    mean_max_c=("temp_max_c", "mean"),
    total_precip_mm=("precipitation_mm", "sum"),
)
table = stations.set_index("station_id")[["name", "country"]].join(summary)
result_df = table.round(1).sort_values("mean_max_c", ascending=False)
