"""The web console (``spark-mq console``): server-rendered pages over a running cluster.

Layout, one concept per module:

- :mod:`~spark_mq.console.config`: :class:`ConsoleConfig`, the console's typed settings;
- :mod:`~spark_mq.console.sampler`: the background thread that samples every group's lag
  (through :class:`~spark_mq.monitoring.lag_exporter.LagExporter`) and every partition's end
  offset, keeping a bounded history for the lag chart and the throughput figures;
- :mod:`~spark_mq.console.record_view`: reading a page of records for the topic browser and
  showing a value as text, hex or JSON;
- :mod:`~spark_mq.console.log_sizes`: partition sizes from the leaders' DescribeLogDirs;
- :mod:`~spark_mq.console.charts`: the plotly lag chart;
- :mod:`~spark_mq.console.context`: what the requests share (config, page Admin, sampler,
  CSRF token);
- :mod:`~spark_mq.console.pages`: the read-only pages;
- :mod:`~spark_mq.console.actions`: the admin actions (``--allow-admin``) and their
  confirmation pages;
- :mod:`~spark_mq.console.app`: the Flask application and its error pages;
- :mod:`~spark_mq.console.server`: serving the application with waitress.

The pages are Jinja templates in ``templates/`` (autoescaped).

Flask, waitress and plotly are the optional extra ``spark-mq[console]``; only the command
``spark-mq console`` (``spark_mq/cli/console.py``) imports this package.
"""
