"""The pieces every layer shares: configuration, ids, models, errors, progress, fault points, the HTTP retry loop, query options."""
