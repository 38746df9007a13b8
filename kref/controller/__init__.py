"""kref.controller: the KRaft cores (spec/KRaft.tla) and their pure formats.

The quorum member (quorum.py), the active controller (controller.py), the
broker's lifecycle (lifecycle.py), metadata snapshots (snapshot.py: format,
policy, files through the FileSystem port) and the KRaft settings checks
(settings.py). Their drivers live in kref/node; tests/test_cores_are_pure.py
checks every module here. See docs/architecture.md and docs/kraft.md."""
