package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/walbus/walbus/bench"
	"github.com/walbus/walbus/bench/floor"
)

// benchCmd runs walbus bench; Ctrl-C ends the run early and still reports.
func benchCmd(args []string) int {
	if len(args) > 0 && args[0] == "floor" {
		return floorCmd(args[1:])
	}
	cfg, err := bench.ParseArgs(args, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		return 2
	}
	tuneGC()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := bench.Run(ctx, cfg, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "walbus bench:", err)
		return 1
	}
	if cfg.JSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(res)
	} else {
		err = res.WriteText(os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "walbus bench:", err)
		return 1
	}
	if problem := res.Problem(); problem != "" {
		fmt.Fprintln(os.Stderr, "walbus bench: failed:", problem)
		return 1
	}
	return 0
}

// floorCmd serves bench/floor, the do-nothing broker that is the control
// for bench runs, until interrupted.
func floorCmd(args []string) int {
	fs := flag.NewFlagSet("walbus bench floor", flag.ContinueOnError)
	addr := fs.String("amqp", "127.0.0.1:5673", "address to listen on")
	durable := fs.String("durable", "", "append each message and settlement to this `file`, and fsync it, before answering or delivering")
	overwrite := fs.Bool("overwrite", false, "with --durable: fill the file with zeros first, then write over them with fdatasync")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `usage: walbus bench floor [--amqp ADDR] [--durable FILE [--overwrite]]

Serves a Service Bus that keeps nothing and checks nothing: any key, any
queue, messages in memory, every settlement answered at once. Run the same
walbus bench load against it and against walbus serve, side by side: what
clients see through the floor is what the machine and the client cost
before a broker does any real work. Not a broker: never point an
application at it.

With --durable, every message sent to a queue and every settlement is
appended to FILE and fsynced, in group commits, before it is answered or
delivered: the least any broker that acknowledges only what is durable
must do, and so what durability costs on this disk. FILE is emptied at
start and whenever it passes 256 MiB. With --overwrite, FILE is filled
with 64 MiB of zeros at start and written over, round and round, with
fdatasync: on ext4 that commits no metadata, the cheapest durable write
there is (walbus's log appends, as tidwall/wal does).

`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *overwrite && *durable == "" {
		fmt.Fprintln(os.Stderr, "walbus bench floor: --overwrite needs --durable FILE")
		return 2
	}
	srv := floor.New()
	if *durable != "" {
		var err error
		how := floor.Append
		if *overwrite {
			how = floor.Overwrite
		}
		if srv, err = floor.NewDurable(*durable, how); err != nil {
			fmt.Fprintln(os.Stderr, "walbus bench floor:", err)
			return 1
		}
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		srv.Close()
		fmt.Fprintln(os.Stderr, "walbus bench floor:", err)
		return 1
	}
	fmt.Fprintln(os.Stderr, "walbus bench floor: listening on", ln.Addr())
	if a, ok := ln.Addr().(*net.TCPAddr); ok && !a.IP.IsLoopback() {
		fmt.Fprintln(os.Stderr, "walbus bench floor: warning: not a loopback address, and the floor takes any key from anyone")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		ln.Close()
	}()
	srv.Serve(ln)
	if err := srv.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "walbus bench floor:", err)
		return 1
	}
	return 0
}
