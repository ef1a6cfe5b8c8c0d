"""Moving durable rows in and out: the JSON-lines format and its drivers."""
