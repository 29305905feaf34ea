"""Django's PostgreSQL backend, its pool built with Canopy's check (research.postgresql.checks).

Django builds the psycopg pool itself and passes it either psycopg_pool's round-trip check
(`CONN_HEALTH_CHECKS`) or none, so a check of one's own needs the pool built here. Everything
else is Django's backend as it is.
"""

from django.core.exceptions import ImproperlyConfigured
from django.db.backends.postgresql import base

from research.postgresql.checks import IdleConnectionCheck


class DatabaseWrapper(base.DatabaseWrapper):
    @property
    def pool(self):
        pool_options = self.settings_dict["OPTIONS"].get("pool")
        if self.alias == base.NO_DB_ALIAS or not pool_options:
            return None
        if self.alias not in self._connection_pools:
            if self.settings_dict.get("CONN_MAX_AGE", 0) != 0:
                raise ImproperlyConfigured("Pooling doesn't support persistent connections.")
            from psycopg_pool import ConnectionPool

            connect_kwargs = self.get_connection_params()
            connect_kwargs["autocommit"] = True  # as Django's: it sets its own mode later
            check = IdleConnectionCheck()
            pool = ConnectionPool(
                kwargs=connect_kwargs,
                open=False,  # opened at the first connection, as Django's
                configure=self._configure_connection,
                check=check,
                **({} if pool_options is True else pool_options),
            )
            check.pool = pool
            # setdefault: threads that start at once may each build one; the first wins.
            self._connection_pools.setdefault(self.alias, pool)
        return self._connection_pools[self.alias]
