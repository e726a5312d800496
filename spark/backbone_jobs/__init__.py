"""Spark jobs over the aggregate cluster: the hourly warehouse load (`hourly_load`) and the "rising in the
last 24 hours" streaming job (`rising`). Each runs with `python -m backbone_jobs.<name>` or `spark-submit
spark/backbone_jobs/<name>.py`."""
