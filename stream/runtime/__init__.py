"""What every process of the shell stands on: Kafka clients, configuration, errors,
the embedded broker."""
