// Package config loads one sluice pipeline from a YAML file, strictly:
// unknown keys, wrong types, missing required fields and invalid values are
// all collected and reported together, each positioned as
//
//	file:line:col: field.path: what is wrong (hint: how to fix)
//
// Scalar values may use ${VAR} and ${VAR:-default} environment
// interpolation; interpolated values are never repeated in error messages.
// Defaults are declared in the schema's struct tags (schema.go) and applied
// by the decoder (strict.go); configs/reference.yaml documents every key.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Load reads and parses the config file at path, taking ${VAR} values from
// the process environment. Relative paths in the config are resolved
// against the file's directory. An invalid file yields *Errors.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return parse(path, filepath.Dir(abs), data, os.LookupEnv)
}

// Parse parses config data; name is used in messages, and relative paths
// are resolved against its directory. lookupEnv supplies ${VAR} values (nil
// means os.LookupEnv). An invalid config yields *Errors.
func Parse(name string, data []byte, lookupEnv func(string) (string, bool)) (*Config, error) {
	if lookupEnv == nil {
		lookupEnv = os.LookupEnv
	}
	return parse(name, filepath.Dir(name), data, lookupEnv)
}

func parse(name, dir string, data []byte, lookupEnv func(string) (string, bool)) (*Config, error) {
	d := newDecoder(name)
	d.lines, d.lookupEnv = strings.Split(string(data), "\n"), lookupEnv
	c := &Config{File: name, Dir: dir}
	if root := d.parseYAML(data); root != nil {
		d.interpolate("", root, lookupEnv)
		d.at[""] = root
		if d.decode("", root, reflect.ValueOf(c).Elem(), nil) || root.Kind == yaml.MappingNode {
			d.validate(c)
		}
	}
	if len(d.errs) > 0 {
		return nil, finish(name, d.errs)
	}
	d.rememberTransformPositions(c)
	resolvePaths(c, dir)
	return c, nil
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// parseYAML returns the root node of the single document in data, or nil
// after reporting why there is none.
func (d *decoder) parseYAML(data []byte) (root *yaml.Node) {
	defer func() {
		if r := recover(); r != nil {
			d.errorf(nil, "", fmt.Sprintf("invalid YAML (%v)", r), "")
			root = nil
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			d.errorf(&yaml.Node{Line: 1, Column: 1}, "", "the file is empty", "start with pipeline: <name>; see configs/reference.yaml")
		} else {
			d.syntaxError(err)
		}
		return nil
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		d.errorf(&extra, "", "more than one YAML document", "one file configures one pipeline; remove the --- separator")
		return nil
	} else if !errors.Is(err, io.EOF) {
		d.syntaxError(err)
		return nil
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		d.errorf(&yaml.Node{Line: 1, Column: 1}, "", "the file is empty", "start with pipeline: <name>; see configs/reference.yaml")
		return nil
	}
	return doc.Content[0]
}

func (d *decoder) syntaxError(err error) {
	msg := err.Error()
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		d.errorf(&yaml.Node{Line: line}, "", "invalid YAML: "+m[2], "")
		return
	}
	d.errorf(nil, "", "invalid YAML: "+strings.TrimPrefix(msg, "yaml: "), "")
}
