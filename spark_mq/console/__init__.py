"""The web console (``spark-mq console``): server-rendered pages over a running cluster.

Layout, one concept per module:

- :mod:`~spark_mq.console.config`: :class:`ConsoleConfig`, the console's typed settings;
- :mod:`~spark_mq.console.sampler`: the background thread that samples every group's lag
  (through :class:`~spark_mq.monitoring.lag_exporter.LagExporter`) and every partition's end
  offset, keeping a bounded history for the lag chart and the throughput figures;
- :mod:`~spark_mq.console.record_view`: reading a page of records for the topic browser and
  showing a value as text, hex or JSON;
- :mod:`~spark_mq.console.charts`: the plotly lag chart;
- :mod:`~spark_mq.console.app`: the Flask application (pages, admin actions, errors);
- :mod:`~spark_mq.console.server`: serving the application with waitress.

Flask, waitress and plotly are the optional extra ``spark-mq[console]``; nothing else in
spark_mq imports this package.
"""
