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

	"github.com/walbus/walbus/amqpserver/floor"
	"github.com/walbus/walbus/bench"
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

// floorCmd serves amqpserver/floor, the do-nothing broker that is the control
// for bench runs, until interrupted.
func floorCmd(args []string) int {
	fs := flag.NewFlagSet("walbus bench floor", flag.ContinueOnError)
	addr := fs.String("amqp", "127.0.0.1:5673", "address to listen on")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `usage: walbus bench floor [--amqp ADDR]

Serves a Service Bus that keeps nothing and checks nothing: any key, any
queue, messages in memory, every settlement answered at once. Run the same
walbus bench load against it and against walbus serve, side by side: what
clients see through the floor is what the machine and the client cost
before a broker does any real work. Not a broker: never point an
application at it.

`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
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
	floor.New().Serve(ln)
	return 0
}
