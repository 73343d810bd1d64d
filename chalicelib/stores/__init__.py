"""Where state lives: DynamoDB tables (through pynamodb) and S3 payloads, each behind a small class."""
