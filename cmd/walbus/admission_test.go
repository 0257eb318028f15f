package main

import (
	"context"
	"net"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
)

// 10,000 connections from one address that never send a byte do not shut
// real clients out: with the default limits the broker keeps
// --max-pending-per-address of them and closes the rest at once, and a
// Go SDK client from another address connects, sends and receives while
// they are all open. The refusals are counted in /metrics and warned of
// once.
func TestIdleConnectionsLeaveRoomForClients(t *testing.T) {
	// A long handshake timeout: none of the 100 kept may leave meanwhile.
	p := startWalbus(t, t.TempDir(), "--config", writeConfig(t, "orders", ""), "--handshake-timeout", "5m")
	dialer := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}
	idle := make([]net.Conn, 0, 10000)
	defer func() {
		for _, c := range idle {
			c.Close()
		}
	}()
	for len(idle) < 10000 {
		c, err := dialer.Dial("tcp", p.amqp)
		if err != nil {
			t.Fatalf("idle connection %d: %v", len(idle), err)
		}
		idle = append(idle, c)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	client := p.sdkClient()
	defer client.Close(ctx)
	sender, err := client.NewSender("orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := sender.SendMessage(ctx, &azservicebus.Message{Body: []byte("through the crowd")}, nil); err != nil {
		t.Fatalf("send while 10,000 idle connections are open: %v", err)
	}
	receiver, err := client.NewReceiverForQueue("orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := receiver.ReceiveMessages(ctx, 1, nil)
	if err != nil || len(msgs) != 1 || string(msgs[0].Body) != "through the crowd" {
		t.Fatalf("receive: %v %v", msgs, err)
	}
	if err := receiver.CompleteMessage(ctx, msgs[0], nil); err != nil {
		t.Fatal(err)
	}

	metrics := getText(t, "http://"+p.http+"/metrics")
	refused := metricValue(t, metrics, `walbus_connections_refused_total{limit="pending_per_address"}`)
	pending := metricValue(t, metrics, `walbus_connections_pending`)
	if refused < 10000-100 || pending > 100 {
		t.Fatalf("refused %v, pending %v; want at least 9,900 and at most 100", refused, pending)
	}
	if n := strings.Count(p.logs(), "limit=--max-pending-per-address"); n != 1 {
		t.Fatalf("%d warnings naming the limit, want 1:\n%s", n, p.logs())
	}
}

// metricValue reads one sample of a Prometheus text exposition.
func metricValue(t *testing.T, text, sample string) float64 {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(sample) + ` (\S+)$`).FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("no %s in /metrics", sample)
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
