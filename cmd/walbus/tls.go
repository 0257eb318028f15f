package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// serverTLS is the TLS configuration of --tls-cert and --tls-key, nil
// without them: AMQP over TLS the way Service Bus serves it on 5671 (TLS
// first, no AMQP 2 header), and HTTPS.
func serverTLS(o *serveOptions) (*tls.Config, error) {
	if o.tlsCert == "" {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(o.tlsCert, o.tlsKey)
	if err != nil {
		return nil, fmt.Errorf("load TLS certificate: %w", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// certCmd writes a local certificate authority and a server certificate
// signed by it, so developers can make SDKs trust walbus over TLS.
func certCmd(args []string) int {
	fs := flag.NewFlagSet("cert", flag.ContinueOnError)
	dir := fs.String("out", ".", "directory to write ca.pem, ca-key.pem, server.pem and server-key.pem into")
	var hosts stringList
	fs.Var(&hosts, "host", "a DNS name or IP address the server certificate is for (repeatable; default localhost and 127.0.0.1)")
	validity := fs.Duration("valid", 365*24*time.Hour, "how long the certificates are valid")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: walbus cert [--host NAME]... [--out DIR]

Writes a local certificate authority (ca.pem, ca-key.pem) and a server
certificate signed by it (server.pem, server-key.pem). Start walbus with
  walbus serve --amqps 127.0.0.1:5671 --tls-cert server.pem --tls-key server-key.pem
and make the Go SDK trust the authority with SSL_CERT_FILE=ca.pem (or add
ca.pem to the system's trust store); then connection strings without
UseDevelopmentEmulator connect over TLS to port 5671. The certificate
serves a cluster's peer links too (--peer-tls-cert server.pem
--peer-tls-key server-key.pem --peer-tls-ca ca.pem on every node).

Flags:
`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		return 0
	} else if err != nil {
		return 2
	}
	if len(hosts) == 0 {
		hosts = stringList{"localhost", "127.0.0.1"}
	}
	if err := writeCerts(*dir, hosts, *validity); err != nil {
		fmt.Fprintln(os.Stderr, "walbus cert:", err)
		return 1
	}
	fmt.Printf("wrote %s and %s for %s\n", filepath.Join(*dir, "ca.pem"), filepath.Join(*dir, "server.pem"), strings.Join(hosts, ", "))
	return 0
}

type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

// writeCerts creates the CA and the server certificate in dir.
func writeCerts(dir string, hosts []string, validity time.Duration) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "walbus local CA", Organization: []string{"walbus"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	ca, _ := x509.ParseCertificate(caDER)
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	srvTmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: hosts[0], Organization: []string{"walbus"}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(validity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		// Client authentication too: a cluster's node presents it to the
		// others (--peer-tls-cert).
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			srvTmpl.IPAddresses = append(srvTmpl.IPAddresses, ip)
		} else {
			srvTmpl.DNSNames = append(srvTmpl.DNSNames, h)
		}
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, ca, &srvKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	for name, block := range map[string]*pem.Block{
		"ca.pem":         {Type: "CERTIFICATE", Bytes: caDER},
		"server.pem":     {Type: "CERTIFICATE", Bytes: srvDER},
		"ca-key.pem":     ecKeyBlock(caKey),
		"server-key.pem": ecKeyBlock(srvKey),
	} {
		mode := os.FileMode(0o644)
		if strings.HasSuffix(name, "-key.pem") {
			mode = 0o600
		}
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(block), mode); err != nil {
			return err
		}
	}
	return nil
}

func ecKeyBlock(k *ecdsa.PrivateKey) *pem.Block {
	der, _ := x509.MarshalECPrivateKey(k)
	return &pem.Block{Type: "EC PRIVATE KEY", Bytes: der}
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}
