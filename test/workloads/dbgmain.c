/* dbgmain: calls dbglib_run(16) in libdbglib.so (see dbglib.c). */
void dbglib_run(int n);

int main(void)
{
	dbglib_run(16);
	return 0;
}
