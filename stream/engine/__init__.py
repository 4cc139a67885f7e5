"""The worker: the engine around the pure core, its RocksDB table, the due-time index, schedules."""
