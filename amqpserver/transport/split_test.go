package transport

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// selfSigned is a TLS config for 127.0.0.1 and a pool that trusts it.
func selfSigned(t *testing.T) (*tls.Config, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}, pool
}

// One listener tells AMQP, HTTP and TLS apart by their first bytes, and
// inside TLS AMQP from HTTP again; each connection reaches its side with
// every byte it sent, and a connection speaking something else is closed.
func TestSplitTellsProtocolsApart(t *testing.T) {
	cfg, pool := selfSigned(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sp := NewSplit(ln, cfg, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	defer sp.Close()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello "+r.URL.Path)
	})}
	go srv.Serve(sp.HTTP())
	defer srv.Close()
	// The AMQP side echoes the first 8 bytes, and says whether it came over TLS.
	go func() {
		for {
			c, err := sp.AMQP().Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				b := make([]byte, 8)
				if _, err := io.ReadFull(c, b); err != nil {
					return
				}
				tlsUsed := "plain"
				if TLSState(c) != nil {
					tlsUsed = "tls"
				}
				c.Write(append(b, tlsUsed...))
			}()
		}
	}()
	addr := ln.Addr().String()
	amqp := func(c net.Conn, want string) {
		t.Helper()
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write([]byte("AMQP\x03\x01\x00\x00")); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, 8+len(want))
		if _, err := io.ReadFull(c, got); err != nil || string(got) != "AMQP\x03\x01\x00\x00"+want {
			t.Fatalf("AMQP side answered %q, %v", got, err)
		}
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	amqp(c, "plain")
	tc, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool})
	if err != nil {
		t.Fatal(err)
	}
	amqp(tc, "tls")

	for _, client := range []*http.Client{
		{Timeout: 5 * time.Second},
		{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}},
	} {
		scheme := "http"
		if client.Transport != nil {
			scheme = "https"
		}
		resp, err := client.Get(scheme + "://" + addr + "/x")
		if err != nil {
			t.Fatalf("%s: %v", scheme, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != "hello /x" {
			t.Fatalf("%s answered %q", scheme, body)
		}
	}

	c, err = net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	c.Write([]byte("\x00\x01\x02\x03 garbage"))
	if _, err := bufio.NewReader(c).ReadByte(); err == nil {
		t.Fatal("a connection speaking neither AMQP nor HTTP was answered")
	}
	c.Close()
}

func TestHTTPStart(t *testing.T) {
	for s, want := range map[string]bool{"GET ": true, "PUT ": true, "DELE": true, "OPTI": true, "AMQP": true,
		"get ": false, "\x16\x03\x01\x00": false, " GET": false, "G1T ": false} {
		if got := httpStart([]byte(s)); got != want {
			t.Errorf("httpStart(%q) = %v", s, got)
		}
	}
	if !strings.Contains(quoteBytes([]byte{0, 'a'}), `\x00a`) {
		t.Error(quoteBytes([]byte{0, 'a'}))
	}
}
