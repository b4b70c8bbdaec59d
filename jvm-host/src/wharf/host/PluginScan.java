package wharf.host;

import java.io.BufferedReader;
import java.io.File;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.lang.reflect.Modifier;
import java.net.URL;
import java.net.URLClassLoader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Enumeration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.jar.JarEntry;
import java.util.jar.JarFile;
import org.apache.kafka.connect.connector.Connector;

/**
 * Finds the Kafka Connect connector classes of one plugin location, as Kafka Connect's
 * plugin.path scanning does (its "hybrid" discovery): the classes named in the jars'
 * ServiceLoader manifests (META-INF/services/org.apache.kafka.connect.source.SourceConnector
 * and ...sink.SinkConnector, KIP-898) and every concrete public class of the location that
 * implements Connector. A location is a directory (its jars, at any depth, and its class
 * files) or one jar (an uber jar). Its classes are loaded by a class loader of their own
 * whose parent holds the host and the Connect API, so the location's jars are what the
 * connector sees beside them.
 */
final class PluginScan {
  static final String[] MANIFESTS = {
    "META-INF/services/org.apache.kafka.connect.source.SourceConnector",
    "META-INF/services/org.apache.kafka.connect.sink.SinkConnector",
  };

  /** What a location holds. */
  static final class Found {
    final URLClassLoader loader;
    final List<Class<? extends Connector>> connectors;

    Found(URLClassLoader loader, List<Class<? extends Connector>> connectors) {
      this.loader = loader;
      this.connectors = connectors;
    }
  }

  private PluginScan() {}

  /** Scans the locations (directories or jars) as one plugin. */
  static Found scan(List<File> locations) throws IOException {
    List<File> jars = new ArrayList<>();
    List<File> classDirs = new ArrayList<>();
    for (File location : locations) {
      if (location.isDirectory()) {
        collect(location, jars);
        if (hasClassFiles(location)) classDirs.add(location);
      } else if (location.isFile() && location.getName().endsWith(".jar")) {
        jars.add(location);
      } else {
        throw new IOException(location + " is neither a directory nor a .jar file");
      }
    }
    List<URL> urls = new ArrayList<>();
    for (File j : jars) urls.add(j.toURI().toURL());
    for (File d : classDirs) urls.add(d.toURI().toURL());
    URLClassLoader loader =
        new URLClassLoader(urls.toArray(new URL[0]), PluginScan.class.getClassLoader());
    Set<String> names = new TreeSet<>();
    // Every class of the location to its superclass, read from the class files' headers:
    // loading every class of a location as large as Debezium's (390 jars) takes a minute,
    // reading the headers a few seconds.
    Map<String, String> supers = new HashMap<>();
    for (File j : jars) {
      try (JarFile jar = new JarFile(j)) {
        for (String manifest : MANIFESTS) {
          JarEntry e = jar.getJarEntry(manifest);
          if (e != null) {
            try (InputStream in = jar.getInputStream(e)) {
              names.addAll(serviceNames(in));
            }
          }
        }
        Enumeration<JarEntry> entries = jar.entries();
        while (entries.hasMoreElements()) {
          JarEntry e = entries.nextElement();
          if (!isCandidate(e.getName())) continue;
          try (InputStream in = jar.getInputStream(e)) {
            header(className(e.getName()), in, supers);
          }
        }
      }
    }
    for (File d : classDirs) classFiles(d, "", supers);
    for (String name : supers.keySet()) {
      if (extendsConnector(name, supers)) names.add(name);
    }
    List<Class<? extends Connector>> found = new ArrayList<>();
    for (String name : names) {
      Class<?> c;
      try {
        c = Class.forName(name, false, loader);
      } catch (Throwable t) {
        // A class whose dependencies are missing cannot be a usable connector; Connect
        // skips it the same way.
        continue;
      }
      if (isConnector(c, loader)) found.add(c.asSubclass(Connector.class));
    }
    return new Found(loader, found);
  }

  /** A class Connect would offer: a concrete public Connector of this location. */
  static boolean isConnector(Class<?> c, ClassLoader loader) {
    if (c.getClassLoader() != loader) return false; // the host's or the Connect API's
    if (!Connector.class.isAssignableFrom(c)) return false;
    int m = c.getModifiers();
    if (!Modifier.isPublic(m) || Modifier.isAbstract(m) || c.isInterface()) return false;
    try {
      return Modifier.isPublic(c.getDeclaredConstructor().getModifiers());
    } catch (NoSuchMethodException | LinkageError e) {
      return false;
    }
  }

  /** A class file that may hold a connector: not a module or package descriptor. */
  static boolean isCandidate(String entry) {
    return entry.endsWith(".class")
        && !entry.endsWith("module-info.class")
        && !entry.endsWith("package-info.class")
        && !entry.startsWith("META-INF/");
  }

  static String className(String entry) {
    return entry.substring(0, entry.length() - ".class".length()).replace('/', '.');
  }

  /** The class names of a ServiceLoader manifest: one a line, '#' starts a comment. */
  static List<String> serviceNames(InputStream in) throws IOException {
    List<String> out = new ArrayList<>();
    BufferedReader r = new BufferedReader(new InputStreamReader(in, StandardCharsets.UTF_8));
    for (String line; (line = r.readLine()) != null; ) {
      int hash = line.indexOf('#');
      String name = (hash >= 0 ? line.substring(0, hash) : line).trim();
      if (!name.isEmpty()) out.add(name);
    }
    return out;
  }

  static void collect(File dir, List<File> jars) {
    File[] children = dir.listFiles();
    if (children == null) return;
    java.util.Arrays.sort(children);
    for (File f : children) {
      if (f.isDirectory()) {
        collect(f, jars);
      } else if (f.getName().endsWith(".jar")) {
        jars.add(f);
      }
    }
  }

  static boolean hasClassFiles(File dir) {
    File[] children = dir.listFiles();
    if (children == null) return false;
    for (File f : children) {
      if (f.isFile() && f.getName().endsWith(".class")) return true;
      if (f.isDirectory() && hasClassFiles(f)) return true;
    }
    return false;
  }

  static void classFiles(File dir, String prefix, Map<String, String> supers) throws IOException {
    File[] children = dir.listFiles();
    if (children == null) return;
    for (File f : children) {
      String rel = prefix + f.getName();
      if (f.isDirectory()) {
        classFiles(f, rel + "/", supers);
      } else if (isCandidate(rel)) {
        try (InputStream in = new java.io.FileInputStream(f)) {
          header(className(rel), in, supers);
        }
      }
    }
  }

  /** Connect's connector base classes, which live in the Connect API (the parent loader). */
  static final Set<String> BASES = Set.of(
      "org.apache.kafka.connect.connector.Connector",
      "org.apache.kafka.connect.source.SourceConnector",
      "org.apache.kafka.connect.sink.SinkConnector");

  /** True when the superclass chain of `name`, as far as the location holds it, reaches a
   * connector base class. */
  static boolean extendsConnector(String name, Map<String, String> supers) {
    String s = supers.get(name);
    for (int depth = 0; s != null && depth < 64; depth++) {
      if (BASES.contains(s)) return true;
      s = supers.get(s);
    }
    return false;
  }

  /**
   * Reads a class file's header up to its superclass (JVMS 4.1) and records `name` to its
   * superclass; a file that is not a class file is skipped. Whether the class is public and
   * concrete is checked once it is loaded (isConnector).
   */
  static void header(String name, InputStream raw, Map<String, String> supers) throws IOException {
    java.io.DataInputStream in = new java.io.DataInputStream(new java.io.BufferedInputStream(raw));
    if (in.readInt() != 0xCAFEBABE) return;
    in.readUnsignedShort(); // minor
    in.readUnsignedShort(); // major
    int count = in.readUnsignedShort();
    String[] utf8 = new String[count];
    int[] classNameIndex = new int[count];
    for (int i = 1; i < count; i++) {
      int tag = in.readUnsignedByte();
      switch (tag) {
        case 1: utf8[i] = in.readUTF(); break;
        case 7: classNameIndex[i] = in.readUnsignedShort(); break;
        case 8: case 16: case 19: case 20: in.skipNBytes(2); break;
        case 15: in.skipNBytes(3); break;
        case 3: case 4: case 9: case 10: case 11: case 12: case 17: case 18: in.skipNBytes(4); break;
        case 5: case 6: in.skipNBytes(8); i++; break;
        default: return; // an unknown constant: not a class file this scan understands
      }
    }
    in.readUnsignedShort(); // access_flags
    in.readUnsignedShort(); // this_class
    int superIndex = in.readUnsignedShort();
    if (superIndex == 0 || superIndex >= count) return;
    String superName = utf8[classNameIndex[superIndex]];
    if (superName == null) return;
    supers.put(name, superName.replace('/', '.'));
  }
}
