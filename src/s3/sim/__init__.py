"""s3.sim"""
