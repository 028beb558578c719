// Package chaos is fault injection for tests: a TCP proxy, run in the test
// process, between Sluice's binaries and Redis, that can add latency, cut
// every open connection, black-hole (accept and never answer) and resume.
package chaos

import (
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy forwards TCP connections from its loopback address to a target.
// Its zero value is not usable: build one with Listen. All its methods are
// safe for concurrent use.
//
// Faults apply to every connection, open or new:
//   - SetLatency(d) delays every chunk of bytes by d in each direction (the
//     order of bytes kept, throughput not limited);
//   - Cut closes every open connection, both sides, at once; new ones are
//     accepted and forwarded as before;
//   - Blackhole stops forwarding: open connections stay open but carry no
//     byte either way, and new ones are accepted but not connected to the
//     target, until Resume (bytes read meanwhile are held, as TCP would
//     retransmit them, and forwarded after Resume unless the connection was
//     closed first);
//   - DropReplies discards every byte the target sends until Resume: the
//     requests still reach it and run, their replies are lost (a connection
//     that breaks after Redis ran a command, before its reply arrived).
//
// Bytes read before a connection closes are still forwarded at their due
// time, as a network delivers what was sent: InFlight counts them, so a
// test can wait until a request sent by a caller that gave up has landed.
type Proxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	latency time.Duration
	hole    chan struct{} // non-nil while black-holed; closed by Resume
	drop    bool          // the target's bytes are discarded (DropReplies)
	conns   map[*link]struct{}
	closed  bool
	wg      sync.WaitGroup

	inFlight atomic.Int64 // chunks read and neither written nor discarded
}

// link is one proxied connection: the client's side and the target's.
type link struct {
	client, server net.Conn // server is nil until connected
	mu             sync.Mutex
	done           bool
}

// close closes both sides once.
func (l *link) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done {
		return
	}
	l.done = true
	_ = l.client.Close()
	if l.server != nil {
		_ = l.server.Close()
	}
}

// Listen starts a proxy on a free loopback port forwarding to target
// (host:port). Close stops it.
func Listen(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("chaos: listen: %w", err)
	}
	p := &Proxy{ln: ln, target: target, conns: map[*link]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetLatency delays every chunk forwarded from now on by d (0: none).
func (p *Proxy) SetLatency(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.latency = d
}

// Cut closes every open connection and returns how many there were.
func (p *Proxy) Cut() int {
	p.mu.Lock()
	links := make([]*link, 0, len(p.conns))
	for l := range p.conns {
		links = append(links, l)
		delete(p.conns, l)
	}
	p.mu.Unlock()
	for _, l := range links {
		l.close()
	}
	return len(links)
}

// Blackhole stops all forwarding until Resume. Calling it twice is the same
// as once.
func (p *Proxy) Blackhole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.hole == nil {
		p.hole = make(chan struct{})
	}
}

// DropReplies discards the target's bytes from now on, until Resume.
func (p *Proxy) DropReplies() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.drop = true
}

// Resume ends a black hole and the dropping of replies (a no-op when there
// is neither) and sets the latency back to 0.
func (p *Proxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.drop = false
	if p.hole != nil {
		close(p.hole)
		p.hole = nil
	}
	p.latency = 0
}

// dropping reports whether the target's bytes are being discarded.
func (p *Proxy) dropping() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.drop
}

// InFlight is the number of chunks of bytes, either way, that the proxy has
// read and not yet written or discarded (held by a latency or a black hole).
func (p *Proxy) InFlight() int { return int(p.inFlight.Load()) }

// Open is the number of connections open through the proxy.
func (p *Proxy) Open() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// Close stops accepting, closes every connection and waits for the
// proxy's goroutines to end. It is idempotent.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	if p.hole != nil {
		close(p.hole)
		p.hole = nil
	}
	p.mu.Unlock()
	err := p.ln.Close()
	p.Cut()
	p.wg.Wait()
	return err
}

// gate blocks while the proxy is black-holed or until l is closed; it
// returns the latency to apply, and false when l was closed meanwhile.
func (p *Proxy) gate(l *link) (time.Duration, bool) {
	for {
		p.mu.Lock()
		hole, lat, closed := p.hole, p.latency, p.closed
		p.mu.Unlock()
		if hole == nil || closed {
			return lat, true
		}
		t := time.NewTicker(10 * time.Millisecond) // to notice l closing
		select {
		case <-hole:
		case <-t.C:
		}
		t.Stop()
		l.mu.Lock()
		done := l.done
		l.mu.Unlock()
		if done {
			return 0, false
		}
	}
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		l := &link{client: c}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = c.Close()
			return
		}
		p.conns[l] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
		go p.serve(l)
	}
}

// serve connects l to the target (after any black hole) and pumps bytes
// both ways until either side closes or l is cut.
func (p *Proxy) serve(l *link) {
	defer p.wg.Done()
	defer func() {
		l.close()
		p.mu.Lock()
		delete(p.conns, l)
		p.mu.Unlock()
	}()
	if _, ok := p.gate(l); !ok {
		return
	}
	s, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		return
	}
	l.mu.Lock()
	if l.done {
		l.mu.Unlock()
		_ = s.Close()
		return
	}
	l.server = s
	l.mu.Unlock()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pump(l, s, l.client, false) }()
	go func() { defer wg.Done(); p.pump(l, l.client, s, true) }()
	wg.Wait()
}

// chunk is bytes read from one side, to be written to the other at due.
type chunk struct {
	b   []byte
	due time.Time
}

// pump copies src to dst through the proxy's faults (reply: src is the
// target), and closes l when either side ends.
func (p *Proxy) pump(l *link, dst, src net.Conn, reply bool) {
	defer l.close()
	q := make(chan chunk, 256)
	wrote := make(chan struct{})
	go func() { // the writer: in order, each chunk at its due time
		defer close(wrote)
		defer l.close()
		for c := range q {
			if d := time.Until(c.due); d > 0 {
				time.Sleep(d)
			}
			_, err := dst.Write(c.b)
			p.inFlight.Add(-1)
			if err != nil {
				for range q { // drain so the reader never blocks
					p.inFlight.Add(-1)
				}
				return
			}
		}
	}()
	defer func() { close(q); <-wrote }()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.inFlight.Add(1)
			lat, ok := p.gate(l)
			if !ok {
				p.inFlight.Add(-1)
				return
			}
			if reply && p.dropping() {
				p.inFlight.Add(-1)
				continue
			}
			q <- chunk{b: append([]byte(nil), buf[:n]...), due: time.Now().Add(lat)}
		}
		if err != nil { // EOF, a reset or a cut: the link closes either way
			return
		}
	}
}
