package transport

import (
	"context"
	"log/slog"
	"net"
	"net/http"

	"github.com/coder/websocket"
)

// WebSocketPath is where Service Bus serves AMQP over WebSockets, the
// transport of clients behind proxies and firewalls (Go
// ClientOptions.NewWebSocketConn, JS webSocketOptions, Python
// TransportType.AmqpOverWebsocket).
const WebSocketPath = "/$servicebus/websocket"

// webSocketProtocols are the subprotocols a client may ask for: the one the
// AMQP WebSocket binding names, and the one the Go SDK's examples send.
var webSocketProtocols = []string{"AMQPWSB10", "amqp"}

// WebSocketHandler upgrades a request to a WebSocket and serves AMQP over
// it with serve, as a connection of its own: each binary message carries
// AMQP bytes, as the binding (AMQP WebSocket Binding 1.0) has them.
func WebSocketHandler(serve func(net.Conn) error, logger *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: webSocketProtocols,
			InsecureSkipVerify: true}) // clients of every origin: SAS authorises them, not the origin
		if err != nil {
			logger.Info("WebSocket upgrade refused", "remote", r.RemoteAddr, "err", err)
			return
		}
		if c.Subprotocol() == "" {
			c.Close(websocket.StatusPolicyViolation, "the AMQPWSB10 subprotocol is required")
			return
		}
		c.SetReadLimit(-1) // the AMQP frame size limit applies instead
		nc := websocket.NetConn(context.Background(), c, websocket.MessageBinary)
		_ = serve(nc) // serve closes nc
	})
}
