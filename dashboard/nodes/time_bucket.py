"""TimeBucket: the start of the fixed-width time bucket a time falls in, computed by the database, so that a
GROUP BY on it merges rollup rows into wider buckets without sending each row to Python."""

from django.db.models import DateTimeField, Func


class TimeBucket(Func):
    """The start of the ``step``-second bucket ``expression`` is in; buckets are aligned to the Unix epoch, so
    an hour's or a day's buckets start on the hour or at midnight UTC."""

    output_field = DateTimeField()

    def __init__(self, expression, step: int):
        if int(step) != step or step < 1:
            raise ValueError(f"a bucket is a whole number of seconds, not {step!r}")
        super().__init__(expression)
        self.step = int(step)  # a number this module checked, written into the SQL

    def as_postgresql(self, compiler, connection, **extra):
        sql, params = compiler.compile(self.source_expressions[0])
        return f"date_bin('{self.step} seconds'::interval, {sql}, TIMESTAMPTZ '1970-01-01 00:00:00+00')", params

    def as_sqlite(self, compiler, connection, **extra):
        sql, params = compiler.compile(self.source_expressions[0])
        # strftime('%s') is whole Unix seconds; '%%' is how a literal % survives Django's placeholders.
        return (f"datetime((CAST(strftime('%%s', {sql}) AS INTEGER) / {self.step}) * {self.step}, 'unixepoch')",
                params)
