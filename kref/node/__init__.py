"""kref.node: the drivers of a KRaft node (process.roles).

Theory of operation
-------------------
The decisions of a KRaft node live in pure cores elsewhere: the quorum
member in kref/controller/quorum.py, the active controller in
kref/controller/controller.py, the broker's lifecycle in
kref/controller/lifecycle.py, the metadata image in kref/metadata/image.py.
The modules here are their drivers: they translate requests, timers and
committed records into core events and the cores' effects into sockets,
files and trio tasks (the raft driver, the controller driver, the
controller channel, the broker's view of the cluster, the node process,
`kref cluster` and `kref storage`). Nothing here decides; see
docs/architecture.md for the map.
"""
