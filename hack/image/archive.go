package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// sumsName lists the release's files in the format `sha256sum -c` reads.
const sumsName = "SHA256SUMS"

// archiveEntry is one file or directory of an archive; its times and owners
// are set when it is written.
type archiveEntry struct {
	name string
	mode int64
	dir  bool
	data []byte
}

// writeArchive writes entries in their order, each owned by 0:0 with mtime
// and no user or group names, gzipped (no name, no time in the header) when
// gz is set. It writes to a temporary name and renames.
func writeArchive(out string, entries []archiveEntry, mtime time.Time, gz bool) error {
	var buf bytes.Buffer
	var w io.Writer = &buf
	var zw *gzip.Writer
	if gz {
		zw, _ = gzip.NewWriterLevel(&buf, gzip.DefaultCompression)
		w = zw
	}
	tw := tar.NewWriter(w)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: e.mode, Size: int64(len(e.data)), ModTime: mtime.UTC(), Typeflag: tar.TypeReg}
		if e.dir {
			h.Typeflag, h.Size = tar.TypeDir, 0
			h.Name = strings.TrimSuffix(e.name, "/") + "/"
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := tw.Write(e.data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if zw != nil {
		if err := zw.Close(); err != nil {
			return err
		}
	}
	return writeFileAtomic(out, buf.Bytes())
}

func writeFileAtomic(out string, data []byte) error {
	return writeAtomic(out, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// writeAtomic has write fill a temporary file beside out, mode 0644, and
// renames it to out: an interrupted run never leaves half a file.
func writeAtomic(out string, write func(io.Writer) error) error {
	f, err := os.CreateTemp(filepath.Dir(out), ".tmp-*")
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(f.Name()) }()
	if err := write(f); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Chmod(0o644); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), out)
}

// writeCLIArchive writes a .tar.gz holding the binary, LICENSE (if the
// source has one) and README.md in a directory named like the archive.
func writeCLIArchive(out, source, binary string, mtime time.Time) error {
	top := strings.TrimSuffix(filepath.Base(out), ".tar.gz")
	bin, err := os.ReadFile(binary)
	if err != nil {
		return err
	}
	entries := []archiveEntry{{name: top, mode: 0o755, dir: true}, {name: top + "/" + binaryName, mode: 0o755, data: bin}}
	for _, doc := range []string{"LICENSE", "README.md"} {
		b, err := os.ReadFile(filepath.Join(source, doc))
		if errors.Is(err, os.ErrNotExist) && doc == "LICENSE" {
			continue
		}
		if err != nil {
			return err
		}
		entries = append(entries, archiveEntry{name: top + "/" + doc, mode: 0o644, data: b})
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].name < entries[j].name })
	return writeArchive(out, entries, mtime, true)
}

// writeDirTar writes dir's tree (lexical order, directories 0755, files
// 0644) as an uncompressed tar, e.g. an OCI image layout as an OCI archive.
func writeDirTar(out, dir string, mtime time.Time) error {
	var entries []archiveEntry
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			entries = append(entries, archiveEntry{name: rel, mode: 0o755, dir: true})
			return nil
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("%s: not a regular file", p)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		entries = append(entries, archiveEntry{name: rel, mode: 0o644, data: b})
		return nil
	})
	if err != nil {
		return err
	}
	return writeArchive(out, entries, mtime, false)
}

// packageChart packages the chart with `helm package` (version without the
// "v", appVersion the release version, so its image tag defaults to the
// release's) from a copy that, with a registry, defaults to repo. Helm
// stamps the current time on every file: the archive is rewritten with
// fixed times so that it is reproducible too.
func packageChart(ctx context.Context, o ReleaseOptions, repo, work string) (string, error) {
	stage := filepath.Join(work, "chart", chartName)
	if err := copyTree(filepath.Join(o.Source, "charts", chartName), stage); err != nil {
		return "", err
	}
	if o.Registry != "" {
		values := filepath.Join(stage, "values.yaml")
		b, err := os.ReadFile(values)
		if err != nil {
			return "", err
		}
		if !valuesRepository.Match(b) {
			return "", errors.New("the chart's values.yaml sets no image.repository")
		}
		b = valuesRepository.ReplaceAll(b, []byte("${1}"+repo))
		if err := os.WriteFile(values, b, 0o644); err != nil {
			return "", err
		}
	}
	pkgDir := filepath.Join(work, "chart-package")
	if err := helm(ctx, o.Helm, "package", stage, "--version", ChartVersion(o.Version), "--app-version", o.Version, "-d", pkgDir); err != nil {
		return "", err
	}
	name := chartName + "-" + ChartVersion(o.Version) + ".tgz"
	if err := helm(ctx, o.Helm, "lint", "--strict", filepath.Join(pkgDir, name)); err != nil {
		return "", err
	}
	out := filepath.Join(o.Out, name)
	if err := normalizeTarGz(filepath.Join(pkgDir, name), out, o.Created); err != nil {
		return "", err
	}
	return out, nil
}

func helm(ctx context.Context, bin string, args ...string) error {
	b, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, b)
	}
	return nil
}

// normalizeTarGz rewrites a .tar.gz keeping each entry's name, type, mode
// and content, in the same order, with writeArchive's times and owners.
func normalizeTarGz(in, out string, mtime time.Time) error {
	f, err := os.Open(in)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return err
	}
	tr := tar.NewReader(zr)
	var entries []archiveEntry
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("%s: %w", in, err)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			entries = append(entries, archiveEntry{name: h.Name, mode: h.Mode, dir: true})
		case tar.TypeReg:
			b, err := io.ReadAll(tr)
			if err != nil {
				return err
			}
			entries = append(entries, archiveEntry{name: h.Name, mode: h.Mode, data: b})
		default:
			return fmt.Errorf("%s: %s: unexpected tar entry type %q", in, h.Name, h.Typeflag)
		}
	}
	return writeArchive(out, entries, mtime, true)
}

// copyTree copies the regular files and directories under src to dst.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("%s: not a regular file", p)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o644)
	})
}

// writeSHA256Sums writes SHA256SUMS for the regular files directly in dir
// (by name) and returns their names.
func writeSHA256Sums(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var b strings.Builder
	var names []string
	for _, e := range entries {
		if !e.Type().IsRegular() || e.Name() == sumsName || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		sum := sha256.Sum256(data)
		fmt.Fprintf(&b, "%s  %s\n", hex.EncodeToString(sum[:]), e.Name())
		names = append(names, e.Name())
	}
	return names, writeFileAtomic(filepath.Join(dir, sumsName), []byte(b.String()))
}
