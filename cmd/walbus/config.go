package main

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/walbus/walbus/admin/emuconfig"
	"github.com/walbus/walbus/broker"
)

// applyConfig creates the queues an emulator Config.json lists that do not
// exist yet. An existing entity keeps its data and its settings: the file
// describes what to create, as the emulator's does at start.
func applyConfig(b *broker.Broker, path string, logger *slog.Logger) error {
	f, err := emuconfig.Load(path)
	if err != nil {
		return err
	}
	for _, ns := range f.Namespaces {
		for _, q := range ns.Queues {
			_, err := b.CreateQueue(q.Name, q.Config())
			switch {
			case errors.Is(err, broker.ErrEntityExists):
				logger.Debug("queue exists; kept as it is", "queue", q.Name)
			case err != nil:
				return fmt.Errorf("%s: queue %s: %w", path, q.Name, err)
			}
		}
		for _, t := range ns.Topics {
			logger.Warn("topics are not supported yet; skipped", "topic", t.Name)
		}
	}
	return nil
}
