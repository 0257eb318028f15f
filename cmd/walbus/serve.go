package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/walbus/walbus/amqpserver"
	"github.com/walbus/walbus/amqpserver/sas"
	"github.com/walbus/walbus/amqpserver/transport"
	"github.com/walbus/walbus/broker"
	"github.com/walbus/walbus/log"
)

// The emulator's defaults, so its connection strings work unchanged.
const (
	defaultKeyName = "RootManageSharedAccessKey"
	defaultKey     = "SAS_KEY_VALUE"
)

// serve runs the broker until SIGINT or SIGTERM.
func serve(args []string) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	dataDir := fs.String("data", envOr("WALBUS_DATA", "./data"), "data directory")
	amqpAddr := fs.String("amqp", envOr("WALBUS_AMQP", "127.0.0.1:5672"), "AMQP listen address")
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

	keys, err := sas.NewKeys(sas.Key{Name: defaultKeyName, Value: defaultKey, Rights: sas.Manage})
	if err != nil {
		logger.Error("keys", "err", err)
		return 1
	}
	srv := amqpserver.New(b, amqpserver.Config{Keys: keys, Logger: logger,
		Transport: transport.Config{AllowNoSASL: true}})
	ln, err := net.Listen("tcp", *amqpAddr)
	if err != nil {
		logger.Error("cannot listen", "addr", *amqpAddr, "err", err)
		b.Close()
		return 1
	}
	logger.Info("listening", "amqp", ln.Addr().String())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	select {
	case <-ctx.Done():
	case err := <-served:
		if err != nil && !errors.Is(err, transport.ErrServerClosed) {
			logger.Error("AMQP listener failed", "err", err)
		}
	}
	logger.Info("shutting down")
	shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	srv.Shutdown(shutdown)
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
