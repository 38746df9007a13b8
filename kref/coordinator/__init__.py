"""kref.coordinator: the group coordinator core, the __consumer_offsets
formats and producer id blocks, all pure (their drivers live in kref/broker;
tests/test_cores_are_pure.py checks every module here)."""
