"""EMS, the context cache pooled over the CPUs' DRAM: the pool, its index and the engine's lookups."""
