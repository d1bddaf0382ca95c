"""Operations on a whole index: Parquet export and import, checks, source change detection."""
