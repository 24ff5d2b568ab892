"""``python -m spark_mq.broker``: see :mod:`spark_mq.broker.main`."""

import sys

from spark_mq.broker.main import main

sys.exit(main())
