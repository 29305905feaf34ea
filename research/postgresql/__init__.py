"""Django's PostgreSQL backend with the pool's check of research.postgresql.checks
(`ENGINE = "research.postgresql"`)."""
