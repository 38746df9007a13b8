"""kref.sim: the deterministic simulator (virtual clock, seeded scheduler,
faulty network and disk) that will drive the same cores as the broker.
Not built yet; see docs/architecture.md."""
