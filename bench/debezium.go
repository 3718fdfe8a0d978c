package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf16"

	"github.com/sluice-cdc/sluice/integration/harness"
)

// DebeziumVersion is the Debezium release of the peer runner (PostgreSQL).
// Keep it in step with <debezium.version> in bench/debezium/pom.xml.
const DebeziumVersion = "3.6.1.Final"

// DebeziumMariaDBVersion is the Debezium release the runner captures
// MariaDB with: the MariaDB connector is not published at DebeziumVersion
// and the MySQL connector of that release refuses MariaDB (see
// bench/debezium/pom.xml). Keep it in step with <debezium.mariadb.version>.
const DebeziumMariaDBVersion = "3.5.0.Final"

// debeziumVersion is the Debezium release that runs connector.
func debeziumVersion(connector string) string {
	if connector == "mariadb" {
		return DebeziumMariaDBVersion
	}
	return DebeziumVersion
}

// debeziumJarsTimeout bounds the one-time Maven build of the runner.
const debeziumJarsTimeout = 15 * time.Minute

// ErrDebeziumUnavailable wraps the errors of StartDebezium that mean the
// runner cannot be had on this machine (no Java, no Maven to build it, no
// taskset): tests skip on it outside CI (harness.SkipOrFail).
var ErrDebeziumUnavailable = errors.New("debezium runner unavailable")

// DebeziumOptions describe one Debezium capture: the Debezium embedded
// engine with the PostgreSQL connector (DebeziumVersion) or the MariaDB
// connector (DebeziumMariaDBVersion), producing every change event as JSON
// (Kafka's JsonConverter with schemas off, for key and value: no schema
// registry) to topic <TopicPrefix>.<schema>.<table>
// (<TopicPrefix>.<database>.<table> for MariaDB) with the producer settings
// of sluice's Kafka sink: acks=all, idempotence, lz4, linger 5ms, batches
// up to ~1MB. Each engine batch is acknowledged by the broker before
// Debezium commits its offsets, as a Kafka sink must.
type DebeziumOptions struct {
	// Connector is "postgres" or "mariadb".
	Connector string
	// Host ("" means 127.0.0.1) and Port of the database server.
	Host string
	Port int
	// User ("" means postgres / root), Password and Database: the account
	// and the database captured.
	User, Password, Database string
	// Tables are "schema.table" (PostgreSQL) or "database.table" (MariaDB)
	// names; none captures every table.
	Tables []string
	// Slot and Publication (PostgreSQL): the pgoutput replication slot,
	// used as is when it exists (Debezium streams from its position) and
	// created otherwise, and the publication, which must exist.
	Slot, Publication string
	// ServerID (MariaDB) is the binlog client's replica server id.
	ServerID uint32
	// SnapshotMode is Debezium's snapshot.mode: "no_data" (the default)
	// streams only, from the slot's position or the binlog's current one;
	// "initial" snapshots the tables first.
	SnapshotMode string
	// TopicPrefix is Debezium's topic.prefix.
	TopicPrefix string
	// Brokers are the Kafka bootstrap addresses. Missing topics are created
	// with the broker's defaults.
	Brokers []string
	// Records is how many data-change records (inserts, updates, deletes,
	// snapshot reads; no tombstones) the run waits for the broker to
	// acknowledge.
	Records int
	// CPUs pins the JVM with taskset -c (a CPU list); "" does not pin.
	CPUs string
	// Settings are extra runner settings: "debezium.<property>" for the
	// engine and connector, "producer.<property>" for the Kafka producer.
	Settings map[string]string
}

// DebeziumResult is a finished run's figures.
type DebeziumResult struct {
	// Version is the Debezium release that ran.
	Version string
	// Records is the number of data-change records acknowledged.
	Records int
	// Wall is from the engine's start to the broker's acknowledgement of
	// the last record; FirstRecord from the engine's start to the first
	// data-change record reaching the producer; Ready from the engine's
	// start to the connector streaming (0 when the count was reached
	// first). When the workload is written after StartDebezium returned,
	// the capture's own time is Wall - FirstRecord.
	Wall, FirstRecord, Ready time.Duration
	// CPU is the JVM's user+system time over the whole run.
	CPU time.Duration
	// PeakRSS is the JVM's peak resident set (VmHWM) in bytes, read when it
	// reported its result (else its rusage maximum).
	PeakRSS float64
}

// DebeziumRun is a running Debezium capture (a JVM).
type DebeziumRun struct {
	version string
	cmd     *exec.Cmd
	dir     string
	stderr  *debeziumTail

	ready  chan struct{} // closed at the ready line (or the result line)
	result chan struct{} // closed at the result line
	exited chan struct{} // closed once the process is reaped

	mu       sync.Mutex
	res      debeziumLine
	peakRSS  float64
	waitErr  error
	protoErr error

	killOnce sync.Once
}

// debeziumLine is one protocol line of the runner's stdout.
type debeziumLine struct {
	Ready         bool    `json:"ready"`
	Records       int     `json:"records"`
	FirstRecordMS float64 `json:"first_record_ms"`
	ReadyMS       float64 `json:"ready_ms"`
	WallMS        float64 `json:"wall_ms"`
}

// StartDebezium builds the runner once (DebeziumJarDir), starts it in a JVM
// (-Xmx1g, pinned with taskset when CPUs is set) and returns once the connector streams, so that changes
// committed from then on are captured: PostgreSQL from its slot's position
// (a backlog written before is read too), MariaDB from the binlog position
// Debezium took at start. With a snapshot mode that reaches Records before
// streaming, it returns at the result instead (Wait returns it). ctx bounds
// the start only; on error the process is killed and the error holds the
// tail of its stderr.
func StartDebezium(ctx context.Context, o DebeziumOptions) (*DebeziumRun, error) {
	settings, err := o.settings()
	if err != nil {
		return nil, err
	}
	jars, err := DebeziumJarDir(ctx, o.Connector)
	if err != nil {
		return nil, err
	}
	java, err := harness.JavaBinary()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "sluice-debezium-")
	if err != nil {
		return nil, err
	}
	settings["work-dir"] = dir
	config := filepath.Join(dir, "debezium.properties")
	if err := os.WriteFile(config, debeziumProperties(settings), 0o600); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	args := append(append([]string{java, "-Xmx1g", "-XX:+ExitOnOutOfMemoryError"}, harness.TestJVMFlags()...),
		"-cp", filepath.Join(jars, "*"), "io.sluice.bench.DebeziumBench", "--config", config)
	if o.CPUs != "" {
		ts, err := exec.LookPath("taskset")
		if err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("%w: taskset not found for CPUs %q (apt-get install util-linux)", ErrDebeziumUnavailable, o.CPUs)
		}
		args = append([]string{ts, "-c", o.CPUs}, args...)
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	r := &DebeziumRun{
		version: debeziumVersion(o.Connector),
		cmd:     cmd,
		dir:     dir,
		stderr:  &debeziumTail{max: 64 << 10},
		ready:   make(chan struct{}),
		result:  make(chan struct{}),
		exited:  make(chan struct{}),
	}
	cmd.Stderr = r.stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := harness.Spawn(cmd); err != nil { // Pdeathsig: the JVM dies with the binary
		os.RemoveAll(dir)
		return nil, err
	}
	go r.read(stdout)

	select {
	case <-r.ready:
		return r, nil
	case <-r.exited:
		err := r.exitError()
		r.cleanup()
		return nil, err
	case <-ctx.Done():
		r.Kill()
		return nil, fmt.Errorf("debezium: not streaming: %w\n%s", ctx.Err(), r.errTail())
	}
}

// Wait waits for the result line and the JVM's exit and returns the run's
// figures. When ctx ends first, the JVM is killed.
func (r *DebeziumRun) Wait(ctx context.Context) (DebeziumResult, error) {
	select {
	case <-r.exited:
	case <-ctx.Done():
		r.Kill()
		return DebeziumResult{}, fmt.Errorf("debezium: %w\n%s", ctx.Err(), r.errTail())
	}
	defer r.cleanup()
	select {
	case <-r.result:
	default:
		return DebeziumResult{}, r.exitError()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.waitErr != nil {
		return DebeziumResult{}, fmt.Errorf("debezium: after its result: %v\n%s", r.waitErr, r.errTail())
	}
	st := r.cmd.ProcessState
	res := DebeziumResult{
		Version:     r.version,
		Records:     r.res.Records,
		Wall:        debeziumMS(r.res.WallMS),
		FirstRecord: debeziumMS(r.res.FirstRecordMS),
		Ready:       debeziumMS(r.res.ReadyMS),
		CPU:         st.UserTime() + st.SystemTime(),
		PeakRSS:     r.peakRSS,
	}
	if res.PeakRSS == 0 {
		if ru, ok := st.SysUsage().(*syscall.Rusage); ok {
			res.PeakRSS = float64(ru.Maxrss) * 1024
		}
	}
	return res, nil
}

// Kill stops the JVM (SIGKILL) and removes its work directory; safe to call
// more than once and after Wait.
func (r *DebeziumRun) Kill() {
	r.killOnce.Do(func() {
		select {
		case <-r.exited:
		default:
			_ = syscall.Kill(-r.cmd.Process.Pid, syscall.SIGKILL)
			<-r.exited
		}
	})
	r.cleanup()
}

// Stderr returns the last 64KB of the runner's stderr (Debezium's log).
func (r *DebeziumRun) Stderr() string { return r.stderr.String() }

func (r *DebeziumRun) cleanup() { os.RemoveAll(r.dir) }

// read follows the runner's stdout, one JSON object a line, then reaps the
// process.
func (r *DebeziumRun) read(stdout io.Reader) {
	sc := bufio.NewScanner(stdout)
	readyClosed := false
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var l debeziumLine
		if err := json.Unmarshal(line, &l); err != nil {
			r.mu.Lock()
			if r.protoErr == nil {
				r.protoErr = fmt.Errorf("unexpected output %q", line)
			}
			r.mu.Unlock()
			continue
		}
		switch {
		case l.Ready:
			if !readyClosed {
				close(r.ready)
				readyClosed = true
			}
		case l.Records > 0:
			// The JVM is still up (it closes the engine after this line):
			// its peak RSS so far is the run's.
			peak := peakRSSOf(strconv.Itoa(r.cmd.Process.Pid))
			r.mu.Lock()
			r.res, r.peakRSS = l, peak
			r.mu.Unlock()
			select {
			case <-r.result:
			default:
				close(r.result)
			}
			if !readyClosed {
				close(r.ready)
				readyClosed = true
			}
		}
	}
	// A scan error (an overlong line) must not leave the JVM blocked on a
	// full pipe.
	_, _ = io.Copy(io.Discard, stdout)
	err := r.cmd.Wait()
	r.mu.Lock()
	r.waitErr = err
	r.mu.Unlock()
	close(r.exited)
}

// exitError describes a runner that exited without its result.
func (r *DebeziumRun) exitError() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	why := "exited without a result"
	if r.waitErr != nil {
		why = r.waitErr.Error()
	}
	if r.protoErr != nil {
		why += "; " + r.protoErr.Error()
	}
	return fmt.Errorf("debezium: %s\n%s", why, r.errTail())
}

// errTail is the end of the runner's stderr for an error message: the
// runner's own diagnosis comes last.
func (r *DebeziumRun) errTail() string {
	s := r.stderr.String()
	if len(s) > 6000 {
		s = "…" + s[len(s)-6000:]
	}
	return s
}

// settings turns the options into the runner's settings.
func (o DebeziumOptions) settings() (map[string]string, error) {
	s := map[string]string{}
	switch o.Connector {
	case "postgres":
		if o.Slot == "" || o.Publication == "" {
			return nil, errors.New("debezium: postgres needs Slot and Publication")
		}
		s["slot"], s["publication"] = o.Slot, o.Publication
	case "mariadb":
		if o.ServerID == 0 {
			return nil, errors.New("debezium: mariadb needs a ServerID")
		}
		s["server-id"] = strconv.FormatUint(uint64(o.ServerID), 10)
	default:
		return nil, fmt.Errorf("debezium: connector %q (want postgres or mariadb)", o.Connector)
	}
	if o.Port <= 0 || o.Database == "" || o.TopicPrefix == "" || len(o.Brokers) == 0 || o.Records <= 0 {
		return nil, errors.New("debezium: Port, Database, TopicPrefix, Brokers and a positive Records are required")
	}
	host := o.Host
	if host == "" {
		host = "127.0.0.1"
	}
	mode := o.SnapshotMode
	if mode == "" {
		mode = "no_data"
	}
	s["connector"] = o.Connector
	s["host"] = host
	s["port"] = strconv.Itoa(o.Port)
	if o.User != "" {
		s["user"] = o.User
	}
	s["password"] = o.Password
	s["database"] = o.Database
	s["tables"] = strings.Join(o.Tables, ",")
	s["snapshot-mode"] = mode
	s["topic-prefix"] = o.TopicPrefix
	s["brokers"] = strings.Join(o.Brokers, ",")
	s["records"] = strconv.Itoa(o.Records)
	for k, v := range o.Settings {
		if !strings.HasPrefix(k, "debezium.") && !strings.HasPrefix(k, "producer.") {
			return nil, fmt.Errorf("debezium: setting %q is neither debezium.* nor producer.*", k)
		}
		s[k] = v
	}
	return s, nil
}

// DebeziumJarDir returns the directory holding the runner's jar and its
// dependencies for connector ("postgres" or "mariadb"): the one named by
// SLUICE_DEBEZIUM_JARS (postgres) or SLUICE_DEBEZIUM_MARIADB_JARS, else the
// cache ${SLUICE_CACHE:-$HOME/.cache/sluice}/debezium-<DebeziumVersion>
// (debezium-mariadb-<DebeziumMariaDBVersion>) as scripts/debezium-jars.sh,
// run from the module root, leaves it: built once, rebuilt when the
// runner's sources change.
func DebeziumJarDir(ctx context.Context, connector string) (string, error) {
	env, want := "SLUICE_DEBEZIUM_JARS", "debezium-"+DebeziumVersion
	switch connector {
	case "postgres":
	case "mariadb":
		env, want = "SLUICE_DEBEZIUM_MARIADB_JARS", "debezium-mariadb-"+DebeziumMariaDBVersion
	default:
		return "", fmt.Errorf("debezium: connector %q (want postgres or mariadb)", connector)
	}
	if d := os.Getenv(env); d != "" {
		if _, err := os.Stat(filepath.Join(d, "debezium-bench.jar")); err != nil {
			return "", fmt.Errorf("%s=%s holds no debezium-bench.jar", env, d)
		}
		return d, nil
	}
	root, err := harness.ModuleRoot()
	if err != nil {
		return "", err
	}
	for _, tool := range []string{"java", "mvn"} {
		if _, err := exec.LookPath(tool); err != nil {
			return "", fmt.Errorf("%w: %s not found (apt-get install openjdk-17-jdk-headless maven)", ErrDebeziumUnavailable, tool)
		}
	}
	sctx, cancel := context.WithTimeout(ctx, debeziumJarsTimeout)
	defer cancel()
	cmd := exec.CommandContext(sctx, "bash", filepath.Join(root, "scripts", "debezium-jars.sh"), connector)
	cmd.Dir = root
	stderr := &debeziumTail{max: 8 << 10}
	cmd.Stderr = stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("scripts/debezium-jars.sh %s: %v\n%s", connector, err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	dir := strings.TrimSpace(lines[len(lines)-1])
	if filepath.Base(dir) != want {
		return "", fmt.Errorf("scripts/debezium-jars.sh made %q, expected a %s directory (are the versions in bench/debezium.go in step with the POM?)", dir, want)
	}
	return dir, nil
}

func debeziumMS(ms float64) time.Duration {
	if ms <= 0 {
		return 0
	}
	return time.Duration(ms * float64(time.Millisecond))
}

// debeziumProperties writes settings in java.util.Properties' format
// (ISO-8859-1 with \u escapes), sorted by name.
func debeziumProperties(settings map[string]string) []byte {
	keys := make([]string, 0, len(settings))
	for k := range settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b bytes.Buffer
	for _, k := range keys {
		b.WriteString(debeziumEscape(k, true))
		b.WriteByte('=')
		b.WriteString(debeziumEscape(settings[k], false))
		b.WriteByte('\n')
	}
	return b.Bytes()
}

func debeziumEscape(s string, key bool) string {
	var b strings.Builder
	for i, r := range s {
		switch {
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\f':
			b.WriteString(`\f`)
		case r == ' ' && (key || i == 0):
			b.WriteString(`\ `)
		case r == '=' || r == ':' || r == '#' || r == '!':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r > 0x7e:
			for _, u := range utf16.Encode([]rune{r}) {
				fmt.Fprintf(&b, `\u%04x`, u)
			}
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// debeziumTail keeps the last max bytes written to it.
type debeziumTail struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *debeziumTail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *debeziumTail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}
