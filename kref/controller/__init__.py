"""kref.controller: the KRaft quorum core and the active controller
(spec/KRaft.tla). Not built yet; see docs/architecture.md."""
