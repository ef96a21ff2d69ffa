"""s3.data"""
