"""kref.sim"""
