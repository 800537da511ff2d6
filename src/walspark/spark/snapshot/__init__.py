"""Copies of tables inside exported snapshots: the initial snapshot.

:mod:`.initial` copies every published table at the slot's consistent point;
:mod:`.pgsnapshot` is the ``pgsnapshot`` data source it reads with (the table sync's copies
too, :mod:`walspark.spark.tablesync`), :mod:`.driver_copy` a small table's copy on the driver.
"""
