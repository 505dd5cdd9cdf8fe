"""The rules of the domain, without I/O: clock, errors, fields, paging, principals, policy,
lifecycle. Everything here is pure so that services, storage backends and tests share one copy."""
