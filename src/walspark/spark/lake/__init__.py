"""The lake side: Delta tables that change rows are applied to, exactly once.

:mod:`.tables` (where tables live and what they share), :mod:`.apply` (the ``foreachBatch``
sink: mirrors), :mod:`.apply_scd2` (history tables), :mod:`.evolution` (tables that follow the
source's DDL), :mod:`.identity` (which columns match a change), :mod:`.unchanged` (unchanged
TOAST values), :mod:`.progress` (which batch was applied where).
"""
