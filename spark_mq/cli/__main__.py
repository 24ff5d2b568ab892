"""``python -m spark_mq.cli``: the same program as the ``spark-mq`` console script."""

from spark_mq.cli import run

run()
