"""What every layer shares: records, failure reasons, declared options, the offline environment."""
