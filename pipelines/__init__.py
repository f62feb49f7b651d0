"""PySpark pipelines over the router's metrics ("router-metrics/1") and loadgen results.

``schemas`` holds every StructType, ``transforms`` the pure DataFrame -> DataFrame functions, and
the job scripts (``batch_job``, ``streaming_job``) own all I/O: reading JSON lines, writing
Parquet, the chart and the summary. Run them from the repository root:
``python -m pipelines.batch_job --help``. Needs the ``spark`` extra and Java 17.
"""
