"""Grounded memory, written (docs/memory.md): the memory processor that folds
``memory-facts`` into each subject's profile on the compacted ``memory``
topic, its pure fold, its RocksDB table and its command."""
