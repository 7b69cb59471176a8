//! Loading shared libraries at run time: a small `dlopen`/`dlsym`/`dlclose` wrapper, and the
//! demo plugin (`libdemo_plugin.so`), loaded once after the workload has started and never
//! unloaded.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::OnceLock;

/// Where `build.rs` put the plugin (overridden with `--plugin PATH`).
pub const DEFAULT_PLUGIN_PATH: &str = env!("DEMO_PLUGIN_PATH");

/// A shared library opened with `dlopen(RTLD_NOW | RTLD_LOCAL)`, closed with `dlclose` on drop.
#[derive(Debug)]
pub struct Library {
    handle: NonNull<c_void>,
    path: PathBuf,
}

// SAFETY: a dlopen handle is a process-wide token; dlsym and dlclose may be called with it from
// any thread (the dynamic loader locks internally).
unsafe impl Send for Library {}
// SAFETY: as above; `&Library` only allows dlsym, which is thread-safe.
unsafe impl Sync for Library {}

impl Library {
    /// Opens the library at `path` (its constructors run now).
    pub fn open(path: &Path) -> Result<Library, String> {
        let c_path = c_path(path)?;
        // SAFETY: `c_path` is a NUL-terminated string; loading runs the library's initializers,
        // which for this project's plugins are none.
        let handle = unsafe { libc::dlopen(c_path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        match NonNull::new(handle) {
            Some(handle) => Ok(Library {
                handle,
                path: path.to_owned(),
            }),
            None => Err(format!("dlopen {}: {}", path.display(), dl_error())),
        }
    }

    /// Whether the library at `path` is loaded in this process now (`RTLD_NOLOAD`).
    pub fn is_loaded(path: &Path) -> bool {
        let Ok(c_path) = c_path(path) else {
            return false;
        };
        // SAFETY: `c_path` is NUL-terminated; with RTLD_NOLOAD nothing is loaded, only a
        // reference taken if it already is.
        let handle = unsafe { libc::dlopen(c_path.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
        if handle.is_null() {
            return false;
        }
        // SAFETY: `handle` came from the dlopen just above; this drops the reference it took.
        unsafe { libc::dlclose(handle) };
        true
    }

    /// The address of the symbol `name` (`dlsym`).
    pub fn symbol(&self, name: &CStr) -> Result<NonNull<c_void>, String> {
        // SAFETY: the handle is open (it is closed only on drop) and `name` is NUL-terminated.
        let address = unsafe { libc::dlsym(self.handle.as_ptr(), name.as_ptr()) };
        NonNull::new(address).ok_or_else(|| {
            format!(
                "dlsym {} in {}: {}",
                name.to_string_lossy(),
                self.path.display(),
                dl_error()
            )
        })
    }

    /// The path it was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Library {
    fn drop(&mut self) {
        // SAFETY: the handle came from dlopen and is closed once, here; whoever holds function
        // pointers from it must stop using them first (the churn thread drops them together).
        unsafe { libc::dlclose(self.handle.as_ptr()) };
    }
}

fn c_path(path: &Path) -> Result<CString, String> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| format!("{}: path contains a NUL byte", path.display()))
}

/// The last `dlerror` message of this thread.
fn dl_error() -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated string valid until the next dl* call on
    // this thread; it is copied at once.
    let message: *const c_char = unsafe { libc::dlerror() };
    if message.is_null() {
        "unknown error".to_owned()
    } else {
        // SAFETY: non-null, so a NUL-terminated string (see above).
        unsafe { CStr::from_ptr(message) }
            .to_string_lossy()
            .into_owned()
    }
}

/// `plugin_mandelbrot(x0, y0, step, size, max_iter)`: the sum of the escape-time iteration
/// counts of a `size` × `size` tile.
pub type MandelbrotFn = unsafe extern "C" fn(f64, f64, f64, c_int, c_int) -> u64;
/// `plugin_thread_start(entry, arg, &thread)`: runs `entry(arg)` on a new thread made with
/// `pthread_create`; returns 0 or an error number.
pub type ThreadStartFn =
    unsafe extern "C" fn(extern "C" fn(*mut c_void), *mut c_void, *mut u64) -> c_int;
/// `plugin_thread_join(thread)`: `pthread_join`; returns 0 or an error number.
pub type ThreadJoinFn = unsafe extern "C" fn(u64) -> c_int;

/// The demo plugin with its functions looked up.
#[derive(Debug)]
pub struct DemoPlugin {
    library: Library,
    /// The mandelbrot phase's hot leaf.
    pub mandelbrot: MandelbrotFn,
    /// Starts a thread made by C.
    pub thread_start: ThreadStartFn,
    /// Joins a thread made by `thread_start`.
    pub thread_join: ThreadJoinFn,
}

impl DemoPlugin {
    /// The path it was loaded from.
    pub fn path(&self) -> &Path {
        self.library.path()
    }
}

static PLUGIN: OnceLock<DemoPlugin> = OnceLock::new();

/// Loads the demo plugin from `path` and publishes it to [`loaded`] (once per process; a second
/// call returns the plugin already loaded).
pub fn load(path: &Path) -> Result<&'static DemoPlugin, String> {
    if let Some(plugin) = PLUGIN.get() {
        return Ok(plugin);
    }
    let library = Library::open(path)?;
    let mandelbrot = library.symbol(c"plugin_mandelbrot")?;
    let thread_start = library.symbol(c"plugin_thread_start")?;
    let thread_join = library.symbol(c"plugin_thread_join")?;
    // SAFETY: these symbols are functions of c/plugin.c with exactly these signatures, and the
    // library stays loaded for the rest of the process (it is never unloaded once published).
    let plugin = unsafe {
        DemoPlugin {
            mandelbrot: std::mem::transmute::<*mut c_void, MandelbrotFn>(mandelbrot.as_ptr()),
            thread_start: std::mem::transmute::<*mut c_void, ThreadStartFn>(thread_start.as_ptr()),
            thread_join: std::mem::transmute::<*mut c_void, ThreadJoinFn>(thread_join.as_ptr()),
            library,
        }
    };
    Ok(PLUGIN.get_or_init(|| plugin))
}

/// The demo plugin, once [`load`] has loaded it.
pub fn loaded() -> Option<&'static DemoPlugin> {
    PLUGIN.get()
}
