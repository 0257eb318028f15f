package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/walbus/walbus/broker"
	"github.com/walbus/walbus/log"
)

// serve runs the broker until SIGINT or SIGTERM.
func serve(args []string) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	dataDir := fs.String("data", envOr("WALBUS_DATA", "./data"), "data directory")
	syncFlag := fs.String("sync", envOr("WALBUS_SYNC", "always"), "fsync policy: always, interval or none (unsafe)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	policy, err := log.ParseSyncPolicy(*syncFlag)
	if err != nil {
		fmt.Fprintln(os.Stderr, "walbus serve:", err)
		return 2
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	b, rec, err := broker.Open(broker.Options{Dir: *dataDir, Sync: policy, Logger: logger})
	if err != nil {
		logger.Error("cannot start", "err", err)
		return 1
	}
	logger.Info("recovered", "entities", len(rec.Entities), "took", rec.Took, "data", *dataDir, "sync", policy)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	logger.Info("shutting down")
	if err := b.Close(); err != nil {
		logger.Error("shutdown", "err", err)
		return 1
	}
	return 0
}

func envOr(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}
