"""walspark's own files (everything outside the Delta tables) on any filesystem Spark writes Delta to.

:func:`location` turns a URI into a :class:`Location` (local disk, S3, GCS, Azure, HDFS);
:class:`StorageSettings` says which identity and endpoint object stores are reached with;
:class:`TargetLayout` says where each of a target's tables and files lives.
"""

from walspark.storage.layout import TargetLayout
from walspark.storage.location import Location, fsync_dir, location
from walspark.storage.settings import (
    StorageSettings,
    current_settings,
    spark_conf_from_env,
)

__all__ = [
    "Location",
    "StorageSettings",
    "TargetLayout",
    "current_settings",
    "fsync_dir",
    "location",
    "spark_conf_from_env",
]
