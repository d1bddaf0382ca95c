"""What keeps the index level with the sources unattended: the source sensors, the automation sensor and its
condition, the daily schedules and the jobs they launch."""
