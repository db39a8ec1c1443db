// NullChecks dereferences null in a hot loop and catches the
// NullPointerException. Once the JIT has compiled len, it has no null check
// of its own: the load from a null array faults, and the JVM turns its
// SIGSEGV into the exception (an implicit null check). A profiler's library
// in the process must leave that signal to the JVM.
public class NullChecks {
    static int len(int[] a) {
        return a.length;
    }

    public static void main(String[] args) {
        int[] some = new int[7];
        long sum = 0;
        int caught = 0;
        for (int i = 0; i < 3_000_000; i++) {
            int[] a = i % 1000 == 999 ? null : some;
            try {
                sum += len(a);
            } catch (NullPointerException e) {
                caught++;
            }
        }
        System.out.println("sum " + sum + ", caught " + caught);
        System.err.println("done");
    }
}
