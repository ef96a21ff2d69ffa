"""s3.evaluate"""
