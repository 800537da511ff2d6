"""Copies of tables inside exported snapshots: the initial snapshot and the table sync.

:mod:`.initial` copies every published table at the slot's consistent point;
:mod:`.snapshot_source` is the ``pgsnapshot`` data source both read with; :mod:`.tablesync`,
:mod:`.tablesync_copy` and :mod:`.tablesync_state` copy tables that join (or are re-copied)
while the stream runs, and hand them over to it.
"""
