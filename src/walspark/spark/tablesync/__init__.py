"""The table sync: tables that join the publication (or are asked to be copied again) while the
stream runs are copied in key-range waves and handed over to it with no gap and no duplicate.

:mod:`.sync` coordinates it beside the sink, :mod:`.copying` copies one table in waves and
:mod:`.state` keeps each table's state and the resnapshot requests (docs/design/table-sync.md).
"""
