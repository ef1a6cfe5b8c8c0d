"""Moving memory in and out: the JSON-lines format of durable rows and its drivers (``rows``),
and what every import shares (``progress``: the ``Progress`` protocol and the rich bar;
``report``: the one ``ImportReport``)."""
