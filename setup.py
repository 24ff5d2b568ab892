"""The optional C extension; everything else is in pyproject.toml.

``spark_mq.storage._varint_scan`` decodes varint record bodies (docs/format.md, "Varint body")
in one pass over a fetch, and encodes a producer's small batches into them. It is optional:
when it cannot be built (no C compiler), the package installs without it and
:mod:`spark_mq.storage.varint_records` uses its pure-Python fallback, which gives identical
results, only slower.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "spark_mq.storage._varint_scan",
            ["spark_mq/storage/_varint_scan.c"],
            extra_compile_args=["-O2", "-std=c11", "-Wall", "-Wextra", "-Wno-unused-parameter"],
            optional=True,
        )
    ]
)
