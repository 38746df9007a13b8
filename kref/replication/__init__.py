"""kref.replication"""
