package harness

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// RegistryVersion is the Apicurio Registry release the harness runs as its
// Confluent-compatible schema registry. Keep it in step with
// <apicurio.version> in integration/registry/pom.xml.
const RegistryVersion = "2.1.3.Final"

// registryBuildTimeout bounds the one-time Maven build of the registry (a
// cold ~/.m2 downloads about 170 MB).
const registryBuildTimeout = 15 * time.Minute

// RegistryOptions tunes a throwaway schema registry.
type RegistryOptions struct {
	// GlobalCompatibility sets the registry-wide compatibility rule
	// (BACKWARD, FORWARD, FULL, their _TRANSITIVE forms or NONE). Empty
	// leaves the registry's default, which is no rule (any schema is
	// accepted), unlike Confluent's BACKWARD.
	GlobalCompatibility string
	// Properties are extra or overriding configuration properties, passed
	// as -Dname=value (Quarkus and registry.* settings).
	Properties map[string]string
	// JVMArgs replace the default heap and GC flags
	// (-Xmx512m -Xms64m -XX:+UseSerialGC).
	JVMArgs []string
	// StartTimeout bounds the start-up (default 90s).
	StartTimeout time.Duration
}

// Registry is a running throwaway Apicurio Registry with in-memory storage,
// serving the Confluent Schema Registry API on 127.0.0.1.
type Registry struct {
	Host string
	Port int
	Dir  string // logs
	Jar  string // quarkus-run.jar
	proc *process
	log  string
}

// URL returns the base URL of the Confluent-compatible API, e.g.
// http://127.0.0.1:PORT/apis/ccompat/v6 (no trailing slash).
func (r *Registry) URL() string {
	return fmt.Sprintf("http://%s:%d/apis/ccompat/v6", r.Host, r.Port)
}

// RootURL returns http://127.0.0.1:PORT, the root of the registry's own APIs.
func (r *Registry) RootURL() string { return fmt.Sprintf("http://%s:%d", r.Host, r.Port) }

// Log returns the tail of the registry log.
func (r *Registry) Log() string { return tail(r.log, 8000) }

// Stop shuts the registry down (SIGTERM) and removes its directory.
func (r *Registry) Stop() error {
	err := r.proc.stop(syscall.SIGTERM, 20*time.Second)
	os.RemoveAll(r.Dir)
	return err
}

// Kill stops the registry with SIGKILL and keeps its directory. Its storage
// is in memory: a new registry starts empty.
func (r *Registry) Kill() { _ = r.proc.stop(syscall.SIGKILL, time.Second) }

// RegistryT starts a registry for a test and stops it at cleanup. Missing
// Java or build (and no Maven to build it) skip the test, except in CI where
// they fail it.
func RegistryT(t testing.TB, opts ...RegistryOptions) *Registry {
	t.Helper()
	return serverT(t, opts, StartRegistry)
}

// StartRegistry starts a registry on a random 127.0.0.1 port, building it
// first (scripts/registry-build.sh) when it is not cached. It returns once
// GET <URL>/subjects answers 200. Stop it with Stop.
func StartRegistry(ctx context.Context, opts RegistryOptions) (*Registry, error) {
	java, err := JavaBinary()
	if err != nil {
		return nil, err
	}
	jar, err := RegistryJar(ctx)
	if err != nil {
		return nil, err
	}
	dir, err := mkTemp("sluice-registry-", os.Getuid(), os.Getgid())
	if err != nil {
		return nil, err
	}
	timeout := opts.StartTimeout
	if timeout <= 0 {
		timeout = 90 * time.Second
	}
	return retryPortClash(ctx, dir, func() (*Registry, error) { return startRegistryOnce(ctx, java, jar, dir, opts, timeout) })
}

func startRegistryOnce(ctx context.Context, java, jar, dir string, opts RegistryOptions, timeout time.Duration) (*Registry, error) {
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	r := &Registry{Host: "127.0.0.1", Port: port, Dir: dir, Jar: jar, log: filepath.Join(dir, "registry.log")}

	props := map[string]string{
		"quarkus.http.host": r.Host,
		"quarkus.http.port": strconv.Itoa(port),
		// As built: silences the build-time-property warning.
		"quarkus.package.type": "fast-jar",
		// In-memory H2, one per process (the default, made explicit).
		"registry.storage.kind":     "sql",
		"quarkus.log.console.color": "false",
		"registry.enable.sentry":    "false",
	}
	if opts.GlobalCompatibility != "" {
		props["registry.rules.global.compatibility"] = opts.GlobalCompatibility
	}
	for k, v := range opts.Properties {
		props[k] = v
	}
	keys := make([]string, 0, len(props))
	for k := range props {
		keys = append(keys, k)
	}
	sort.Strings(keys)

	args := opts.JVMArgs
	if len(args) == 0 {
		args = []string{"-Xmx512m", "-Xms64m", "-XX:+UseSerialGC"}
	}
	args = append(append([]string{}, args...), TestJVMFlags()...)
	args = append(args, "-Djava.awt.headless=true")
	for _, k := range keys {
		args = append(args, "-D"+k+"="+props[k])
	}
	args = append(args, "-jar", jar)

	lf, err := os.OpenFile(r.log, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(java, args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = lf, lf
	proc, err := startProcess(cmd)
	lf.Close()
	if err != nil {
		return nil, fmt.Errorf("start registry: %w", err)
	}
	r.proc = proc

	client := &http.Client{Timeout: 2 * time.Second}
	err = waitForCtx(ctx, "schema registry", timeout, proc.exited, r.log, func() error {
		resp, err := client.Get(r.URL() + "/subjects")
		if err != nil {
			return err
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET /subjects: %s %s", resp.Status, bytes.TrimSpace(body))
		}
		return nil
	})
	if err != nil {
		_ = proc.stop(syscall.SIGKILL, time.Second)
		return nil, err
	}
	return r, nil
}

// RegistryJar returns the registry's runnable jar: the one named by
// SLUICE_REGISTRY_JAR, else the cached build
// ${SLUICE_CACHE:-$HOME/.cache/sluice}/registry-<RegistryVersion>/quarkus-app/quarkus-run.jar,
// which is made first by running scripts/registry-build.sh (Maven) from the
// module root when it is missing.
func RegistryJar(ctx context.Context) (string, error) {
	if j := os.Getenv("SLUICE_REGISTRY_JAR"); j != "" {
		if st, err := os.Stat(j); err != nil || st.IsDir() {
			return "", fmt.Errorf("SLUICE_REGISTRY_JAR=%s is not a file", j)
		}
		return j, nil
	}
	cache, err := cacheRoot()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cache, "registry-"+RegistryVersion)
	jar := filepath.Join(dir, "quarkus-app", "quarkus-run.jar")
	if registryCacheComplete(dir, jar) {
		return jar, nil
	}
	if err := runCacheScript(ctx, cache, "registry-build.sh", jar, "the schema registry build", registryBuildTimeout); err != nil {
		return "", err
	}
	if !registryCacheComplete(dir, jar) {
		return "", fmt.Errorf("scripts/registry-build.sh left no complete build in %s", dir)
	}
	return jar, nil
}

func registryCacheComplete(dir, jar string) bool {
	if _, err := os.Stat(filepath.Join(dir, ".complete")); err != nil {
		return false
	}
	_, err := os.Stat(jar)
	return err == nil
}
