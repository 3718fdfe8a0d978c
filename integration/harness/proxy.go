package harness

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Proxy forwards TCP connections from a loopback port to a server, and can
// make the server unreachable without touching it: Cut closes every open
// connection and holds new ones silent (a black hole: connected, never
// answered) until Restore, which closes the held ones so clients reconnect.
// It stands in for a network partition or a dead host. SetLatency and
// SetBandwidth make it a slow link instead: the server is reachable, but
// every reply waits and every byte sent to it is paced.
type Proxy struct {
	ln     net.Listener
	target string

	latency   atomic.Int64 // ns added before each chunk of a reply
	bandwidth atomic.Int64 // bytes/s toward the server; 0: unlimited

	accepted atomic.Int64 // connections accepted since the start

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]struct{}
	held  []net.Conn
}

// StartProxy listens on a random 127.0.0.1 port and forwards to target.
func StartProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	go p.accept()
	return p, nil
}

// ProxyT is StartProxy for tests; the proxy closes at cleanup.
func ProxyT(t testing.TB, target string) *Proxy {
	t.Helper()
	p, err := StartProxy(target)
	if err != nil {
		t.Fatalf("proxy: %v", err)
	}
	t.Cleanup(p.Close)
	return p
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Port is the proxy's port.
func (p *Proxy) Port() int { return p.ln.Addr().(*net.TCPAddr).Port }

// Accepted is how many connections the proxy has accepted. A client
// whose dial returned has been counted.
func (p *Proxy) Accepted() int64 { return p.accepted.Load() }

func (p *Proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.accepted.Add(1)
		p.mu.Lock()
		if p.cut {
			p.held = append(p.held, c)
			p.mu.Unlock()
			continue
		}
		p.mu.Unlock()
		go p.forward(c)
	}
}

func (p *Proxy) forward(c net.Conn) {
	p.mu.Lock()
	target := p.target
	p.mu.Unlock()
	s, err := net.Dial("tcp", target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	if p.cut {
		p.mu.Unlock()
		c.Close()
		s.Close()
		return
	}
	p.conns[c], p.conns[s] = struct{}{}, struct{}{}
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn, toServer bool) {
		p.copy(dst, src, toServer)
		done <- struct{}{}
	}
	go pipe(s, c, true)
	go pipe(c, s, false)
	<-done
	c.Close()
	s.Close()
	<-done
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, s)
	p.mu.Unlock()
}

// copy moves bytes from src to dst, paced by the link's settings.
func (p *Proxy) copy(dst, src net.Conn, toServer bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if toServer {
				if bw := p.bandwidth.Load(); bw > 0 {
					time.Sleep(time.Duration(int64(n) * int64(time.Second) / bw))
				}
			} else if d := p.latency.Load(); d > 0 {
				time.Sleep(time.Duration(d))
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// SetTarget makes new connections go to target (a failover behind a VIP);
// open ones stay with the old server until Cut.
func (p *Proxy) SetTarget(target string) {
	p.mu.Lock()
	p.target = target
	p.mu.Unlock()
}

// SetLatency delays every chunk of the server's replies by d (0: none).
func (p *Proxy) SetLatency(d time.Duration) { p.latency.Store(int64(d)) }

// SetBandwidth paces what clients send to the server at bytesPerSecond on
// each connection (0: unlimited).
func (p *Proxy) SetBandwidth(bytesPerSecond int64) { p.bandwidth.Store(bytesPerSecond) }

// Cut makes the server unreachable (see Proxy).
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		c.Close()
	}
}

// Restore makes the server reachable again.
func (p *Proxy) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
	for _, c := range p.held {
		c.Close()
	}
	p.held = nil
}

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() {
	p.ln.Close()
	p.Cut()
	p.Restore()
}
